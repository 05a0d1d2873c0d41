"""`torch_npu.utils.collect_env`: no CANN toolkit on the host."""


def get_cann_version() -> str:
    """The CANN version string; the host has none, so a name that no version check mistakes for a release."""
    return "cpu_ascend"
