from cairn.cli import main

main()
