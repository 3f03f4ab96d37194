"""The one error type a request's constraint can raise while it is being built."""


class ConstraintError(ValueError):
    """A request asks for something the constraint cannot enforce (the server answers 400).

    The message names the offending keyword, schema error or family so the client can fix the
    request; an unenforceable request is never silently answered unconstrained. ``param`` is
    the request field at fault (chat-completions names: ``response_format``, ``tool_choice``,
    ``thinking_token_budget``), or None when it is the server's configuration.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param
