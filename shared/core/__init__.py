"""The pure decision core: no I/O, no clock, no randomness it was not handed.

Allowed imports: the standard library, pydantic, python-jsonpath (a pure evaluator) and
shared.models. tests/unit/test_import_rule.py enforces it.
"""

from shared.core.decide import Decision, decide, new_workflow_state
from shared.core.validation import DefinitionError, validate_workflow_def

__all__ = ["Decision", "DefinitionError", "decide", "new_workflow_state", "validate_workflow_def"]
