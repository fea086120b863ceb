"""A discrete-event model of vLLM's V1 scheduler, with a server and a planner around it."""
