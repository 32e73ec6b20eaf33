"""Operators and operator graphs (DAGs): transformer builders and user-given DAGs."""
