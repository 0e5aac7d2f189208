"""The commands for people at a terminal: each module registers its subcommand
(``register``) and returns an exit code: 0 success, 1 a finding, 2 an error."""
