"""OAK: restart- and age-aware scheduling of distributed deep-learning jobs on shared GPU clusters."""

__version__ = "0.1.0"
