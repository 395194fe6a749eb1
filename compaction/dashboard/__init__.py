"""The compaction app's part of the operator dashboard: the Compact panel, runs, snapshots, restores."""
