"""Active faces: the rig (muscles, jaw, markers) and its inputs."""
