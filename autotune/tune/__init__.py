"""Search: Optuna studies and samplers, the sweep over problems, confirmation of the leaders."""
