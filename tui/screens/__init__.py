"""The screens of the TUI; each loads its view in a worker thread and shows it on the main one."""
