"""Running a simulator over a timeline: the simulator protocol, the frame cache (timeline) and the
replay of a bake."""
