"""The plots people look at: the addendum's ratio plot and the crossover's history over runs."""
