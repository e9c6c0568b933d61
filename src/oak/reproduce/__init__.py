"""The paper's evaluation in one command: experiments, a resumable results store, backends and the report."""
