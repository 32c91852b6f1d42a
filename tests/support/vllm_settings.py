"""The vLLM engine settings every test uses: small memory, because the CI machine's memory
is shared by everything the suite starts."""

VLLM_TEST_MEMORY = {"gpu_memory_utilization": 0.1}
