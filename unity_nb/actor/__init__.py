"""The CodeAct actor: plans in the notebook's namespace, variables by reference, primitives."""

from ._actor import Actor, ActorHandle, act
from ._describe import describe_namespace, describe_value, fingerprint, user_variables
from ._executor import Executor, FinalAnswer, PlanResult, PlanTimeout, final_answer
from ._primitives import Primitives, primitive, registered_primitives, signature_text, unregister_primitive

__all__ = (
    "Actor", "ActorHandle", "act", "Executor", "PlanResult", "FinalAnswer", "PlanTimeout", "final_answer",
    "Primitives", "primitive", "registered_primitives", "unregister_primitive", "describe_value",
    "describe_namespace", "fingerprint", "user_variables", "signature_text",
)
