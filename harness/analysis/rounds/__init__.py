"""How many rounds a decision needs: when to stop, the cost of until-decided, a run's recorded options."""
