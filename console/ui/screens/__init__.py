"""Modal screens: the flag form and the confirm dialog."""
