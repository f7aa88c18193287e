"""The decision of one run: the policy, each family's curve and cap move, the records, their words and JSON."""
