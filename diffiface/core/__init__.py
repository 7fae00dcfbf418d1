"""The core: the backend contract, the derived operators, plans, the operator shell."""
