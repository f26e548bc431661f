from coddl.cli.main import main

main()
