"""The member: the link from this machine's bridge up to a lead."""
