from coddl.cli.main import main

if __name__ == "__main__":  # not when multiprocessing's spawn re-imports it in a child
    main()
