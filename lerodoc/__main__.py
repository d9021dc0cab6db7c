from lerodoc.cli import main

main()
