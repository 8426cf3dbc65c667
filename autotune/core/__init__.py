"""The pieces every stage shares: problems, parameter spaces, outcomes, errors, dtypes, paths, GPU facts."""
