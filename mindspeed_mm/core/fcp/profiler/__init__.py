"""`fcp profile`: measure the cost model's profile table on this device and validate it.

Several processes measure at once (as the ranks of a training round work at once): attention
grids (causal, full, the off-diagonal block of a causal ring step), the linear work per token,
point-to-point and all-to-all exchanges alone and inside a busy step, memory per token and of the
training state. Validation runs real group executions (ring / Ulysses over gloo groups) of mixed
packed batches between the measurement sweeps and compares their times with the cost model's.

Modules: `config` (what to measure), `profiling` (the measuring run and the table it writes), `validation`
(real group executions against the cost model); they are imported where used, so that importing one
does not load the model stacks the others measure.
"""
