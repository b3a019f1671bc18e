"""Placeholder replaced below."""
class OpenAIPolicy:  # temporary until written
    pass
