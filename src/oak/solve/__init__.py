"""Solvers for the per-round assignment problem (a multiple-choice knapsack, one capacity per GPU type): exact ones
(DP, HiGHS, CVXPY) and, for thousands of GPUs and jobs, per-type prices with a certified optimality gap."""

from oak.solve.assignment import SOLVER_METHODS, AssignmentProblem, AssignmentResult, solve_assignment

__all__ = ["SOLVER_METHODS", "AssignmentProblem", "AssignmentResult", "solve_assignment"]
