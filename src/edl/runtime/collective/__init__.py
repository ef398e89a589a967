"""Collective jobs at run time: the rendezvous store (`edl rendezvous`) and the agent
(`edl agent`) that runs an unmodified PyTorch script under torch's elastic agent."""
