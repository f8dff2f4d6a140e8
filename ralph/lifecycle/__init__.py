"""What happens around loops: init, plan, archive, report, parallel loops, demo, status."""
