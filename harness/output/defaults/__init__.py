"""The per-backend and per-device-class defaults: their addendum, Rust match arms, autotune entries, replication."""
