"""The only code that knows file formats: each reader turns one kind of file into a Trace."""
