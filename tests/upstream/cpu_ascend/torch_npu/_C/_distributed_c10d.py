"""HCCL process-group classes as the host sees them: options can be built and are dropped (the host uses gloo)."""


class ProcessGroupHCCL:
    """Stands for HCCL groups; the bed never creates one (transfer_to_npu maps hccl to gloo)."""

    class Options:
        """HCCL process-group options without `hccl_config` (as older torch_npu builds have them)."""

        def __init__(self):
            self.is_high_priority_stream = False
            self._timeout = None
