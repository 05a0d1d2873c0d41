"""Put on PYTHONPATH of the bed's launched processes: installs the import-time fixes of `cpu_ascend_hooks`."""
import cpu_ascend_hooks

cpu_ascend_hooks.install()
