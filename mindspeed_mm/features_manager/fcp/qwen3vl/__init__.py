"""FCP inside MindSpeed-MM's own training path: data loader, Qwen3-VL model and loss adapters."""
