"""grpo-tools: GRPO fine-tuning for LLM tool calling."""
