"""Exact solvers for the per-round assignment problem (a multiple-choice knapsack, one capacity per GPU type)."""

from oak.solve.assignment import SOLVER_METHODS, AssignmentProblem, AssignmentResult, solve_assignment

__all__ = ["SOLVER_METHODS", "AssignmentProblem", "AssignmentResult", "solve_assignment"]
