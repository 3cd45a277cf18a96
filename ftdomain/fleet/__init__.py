"""The fleet's decisions, made on the controller from the inventory's variables and the hosts' facts."""
