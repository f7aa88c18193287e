"""The `moecal` command line: one thin module per command; the work lives in the packages below."""
