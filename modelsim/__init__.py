"""An OpenAI-compatible model-server simulator with vLLM/SGLang/TGI metrics, for tests, demo and bench."""
