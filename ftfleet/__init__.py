"""ftfleet: plan, apply and watch the fleet's playbooks through ansible-runner (ftfleet --help)."""
