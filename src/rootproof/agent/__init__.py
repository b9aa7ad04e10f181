"""The agent: router, loop, draft, prompts and model backends."""
