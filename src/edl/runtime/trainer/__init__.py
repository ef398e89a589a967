"""The trainer side: the user API (`api`) and its clients for master and pservers."""
