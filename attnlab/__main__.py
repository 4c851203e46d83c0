from attnlab.cli import main

main()
