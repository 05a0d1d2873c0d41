"""`torch_npu.contrib`: only `transfer_to_npu` exists on the CPU bed (import it to apply the redirections)."""
