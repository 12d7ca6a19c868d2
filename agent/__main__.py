from db2vtop.agent.cli import main

raise SystemExit(main())
