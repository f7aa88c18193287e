"""What people read: the addendum, its plot and sidecar, the defaults addendum, the history plot."""
