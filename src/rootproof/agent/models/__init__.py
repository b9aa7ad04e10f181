"""Model backends: one protocol, one module per implementation."""

from rootproof.agent.models.base import (
    AssistantMessage,
    Message,
    Model,
    ModelRequest,
    ModelTurn,
    SystemMessage,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "Message",
    "Model",
    "ModelRequest",
    "ModelTurn",
    "SystemMessage",
    "TokenUsage",
    "ToolCall",
    "ToolResultMessage",
    "ToolSpec",
    "UserMessage",
]
