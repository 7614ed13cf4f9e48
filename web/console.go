package web

import (
	"embed"
	"io/fs"
	"net/http"
)

// The console is a single-page app in plain JavaScript and CSS, embedded
// in the binary and served at / on the management port. It talks to the
// same /api the rest of the world uses.

//go:embed console
var consoleFiles embed.FS

func consoleHandler() http.Handler {
	sub, _ := fs.Sub(consoleFiles, "console")
	return http.FileServerFS(sub)
}
