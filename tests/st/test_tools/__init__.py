"""ST helpers: Megatron log to JSON (`st_log`) and comparison with a committed baseline (`st_compare`)."""
