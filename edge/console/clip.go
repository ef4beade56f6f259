package console

import ui "github.com/vesta-cx/euterpe/daemon/console"

// PageText bounds, in bytes, each payload, result, error and dead-letter
// payload the pages show (ui.PageText, which central's console keeps too).
const PageText = ui.PageText
