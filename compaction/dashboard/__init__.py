"""The compaction app's part of the dashboard: the Compact panel, runs, snapshots, restores."""
