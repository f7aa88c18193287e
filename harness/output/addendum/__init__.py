"""One run's addendum: its report data, heading, tables, findings and markdown, and the sections it embeds."""
