"""tether's pytest plugin (markers, hardware skips, per-GPU pinning, tether_measure) is
loaded through its ``pytest11`` entry point wherever tether is installed; nothing to add here."""
