// Host stand-ins for the CUDA built-ins kernels/cuda/*.cu use, so g++ can compile the kernels unchanged and
// tests/support/cuda_emulation.py can run them on a CPU (tests only; that module says what this can and cannot catch).
//
// A launch runs the grid one block at a time, in the order the caller picks (forward, reversed, or a seeded random
// permutation), so a kernel whose result depends on which block runs last fails in one order or another. A launch
// can also be cut short after N blocks (an aborted launch: the rest of the grid never runs). A block's threads are fibers (ucontext) on one OS thread, run
// round-robin by a scheduler: each runs until it returns or waits at a barrier, and a barrier releases its
// waiters once every thread it expects has arrived. __syncthreads is a barrier over the block, and
// __shfl_down_sync one over the warp (lanes publish their value, wait, then read a neighbour's). A barrier only
// part of its threads can reach (divergent __syncthreads, a warp split by an early return) is reported as a
// deadlock. __shared__ is a function-local static: one block at a time makes it the block's shared memory.
#include <math.h>
#include <ucontext.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <random>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
};
struct uint4 {
  unsigned int x, y, z, w;
};
struct float4 {
  float x, y, z, w;
};
struct float2 {
  float x, y;
};

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

struct EmuBarrier {
  unsigned int expected = 0, arrived = 0;
};

struct EmuFiber {
  ucontext_t context;
  bool done = false;
  int waiting_on = -1;  // barrier index, or -1 when runnable
  unsigned int shuffles = 0;
};

struct EmuBlock {
  static constexpr std::size_t kStack = 1 << 16;
  ucontext_t scheduler;
  std::vector<EmuFiber> fibers;
  std::vector<EmuBarrier> barriers;  // 0: the block, 1 + w: warp w
  std::vector<float> lanes[2];       // shuffle values, double-buffered by each lane's shuffle count
  std::vector<std::unique_ptr<char[]>> stacks;
  std::function<void()> body;
  unsigned int running = 0;
};
inline EmuBlock emu;

inline void emu_wait(int barrier) {
  EmuBarrier& b = emu.barriers[barrier];
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    for (EmuFiber& f : emu.fibers) {
      if (f.waiting_on == barrier) f.waiting_on = -1;
    }
    return;
  }
  EmuFiber& self = emu.fibers[emu.running];
  self.waiting_on = barrier;
  swapcontext(&self.context, &emu.scheduler);
}

inline void __syncthreads() { emu_wait(0); }

// A lane can only write buffer p again after the next barrier, which every lane reaches only after reading
// buffer p: so two buffers are enough.
inline float __shfl_down_sync(unsigned int, float v, int offset) {
  const unsigned int t = threadIdx.x, lane = t & 31, buffer = emu.fibers[t].shuffles++ & 1;
  emu.lanes[buffer][t] = v;
  emu_wait(1 + static_cast<int>(t >> 5));
  return lane + offset < 32 ? emu.lanes[buffer][t + offset] : v;
}

inline void __threadfence() {}  // one OS thread: every write is already visible
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
  const unsigned int old = *p;
  *p = old + v;
  return old;
}
inline unsigned int atomicCAS(unsigned int* p, unsigned int compare, unsigned int v) {
  const unsigned int old = *p;
  if (old == compare) *p = v;
  return old;
}
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline void emu_fiber_main() {
  emu.body();
  emu.fibers[emu.running].done = true;  // returning resumes the scheduler (uc_link)
}

inline void emu_run_block(unsigned int threads) {
  emu.fibers.assign(threads, EmuFiber{});
  emu.barriers.assign(1 + threads / 32, EmuBarrier{32, 0});
  emu.barriers[0].expected = threads;
  emu.lanes[0].assign(threads, 0.0f);
  emu.lanes[1].assign(threads, 0.0f);
  while (emu.stacks.size() < threads) emu.stacks.push_back(std::make_unique<char[]>(EmuBlock::kStack));
  for (unsigned int t = 0; t < threads; ++t) {
    ucontext_t& c = emu.fibers[t].context;
    getcontext(&c);
    c.uc_stack.ss_sp = emu.stacks[t].get();
    c.uc_stack.ss_size = EmuBlock::kStack;
    c.uc_link = &emu.scheduler;
    makecontext(&c, emu_fiber_main, 0);
  }
  for (;;) {
    unsigned int finished = 0;
    bool progressed = false;
    for (unsigned int t = 0; t < threads; ++t) {
      EmuFiber& f = emu.fibers[t];
      if (!f.done && f.waiting_on < 0) {
        emu.running = t;
        threadIdx = dim3{t, 0, 0};
        swapcontext(&emu.scheduler, &f.context);
        progressed = true;
      }
      finished += f.done;
    }
    if (finished == threads) return;
    if (!progressed) {
      std::fprintf(stderr, "cuda emulation: deadlock in block (%u, %u): a barrier some threads never reach\n",
                   blockIdx.x, blockIdx.y);
      std::abort();
    }
  }
}

// A CUDA-style launch: args[i] points at the i-th parameter's value (as cuLaunchKernel's kernelParams).
template <typename... Params, std::size_t... I>
void emu_call(void (*kernel)(Params...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<std::remove_reference_t<Params>*>(args[I])...);
}

// Block orders of a launch (emu_launch's `order`).
enum EmuOrder { EMU_FORWARD = 0, EMU_REVERSED = 1, EMU_RANDOM = 2 };

// Runs the grid's blocks in `order` (EMU_RANDOM: a permutation drawn from `seed`), stopping after `max_blocks`
// blocks when that is smaller than the grid (an aborted launch). Returns the number of blocks run.
template <typename... Params>
unsigned long emu_launch(void (*kernel)(Params...), unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                         unsigned int block_x, void** args, int order, unsigned int seed,
                         unsigned long max_blocks) {
  gridDim = dim3{grid_x, grid_y, grid_z};
  blockDim = dim3{block_x, 1, 1};
  emu.body = [&] { emu_call(kernel, args, std::index_sequence_for<Params...>{}); };
  std::vector<dim3> blocks;
  for (unsigned int bz = 0; bz < grid_z; ++bz) {
    for (unsigned int by = 0; by < grid_y; ++by) {
      for (unsigned int bx = 0; bx < grid_x; ++bx) blocks.push_back(dim3{bx, by, bz});
    }
  }
  if (order == EMU_REVERSED) {
    std::reverse(blocks.begin(), blocks.end());
  } else if (order == EMU_RANDOM) {
    std::mt19937 random(seed);
    std::shuffle(blocks.begin(), blocks.end(), random);
  }
  const unsigned long run = std::min<unsigned long>(max_blocks, blocks.size());
  for (unsigned long i = 0; i < run; ++i) {
    blockIdx = blocks[i];
    emu_run_block(block_x);
  }
  return run;
}
