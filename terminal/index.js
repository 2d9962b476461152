// Berth's terminal bundle: xterm.js and its fit add-on, as window.BerthTerminal.
// The page script (static/js/terminal.js) does the talking; this only exposes the parts.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";

window.BerthTerminal = { Terminal, FitAddon };
