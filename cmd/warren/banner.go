package main

import (
	"net"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/web"
)

// logBanner logs, once every listener is bound, what an operator looks
// for first: the version, the listeners, the console's URL and the data
// dir; before it, a warning while the default guest/guest login works.
func logBanner(log *zap.Logger, dataDir string, b *broker.Broker, ws *web.Server) {
	listeners := []string{"amqp " + b.Addr().String()}
	if a := b.AMQPSAddr(); a != nil {
		listeners = append(listeners, "amqps "+a.String())
	}
	console := ""
	if ws != nil {
		if a := ws.Addr(); a != nil {
			listeners = append(listeners, "http "+a.String())
			console = "http://" + reachable(a) + "/"
		}
		if a := ws.HTTPSAddr(); a != nil {
			listeners = append(listeners, "https "+a.String())
			if console == "" {
				console = "https://" + reachable(a) + "/"
			}
		}
		if a := ws.MetricsAddr(); a != nil {
			listeners = append(listeners, "prometheus "+a.String())
		}
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	// The warning goes first: whoever sees the banner has seen it.
	if _, ok := b.Authenticate("guest", "guest"); ok {
		log.Warn("the default user guest with password guest exists: change its password (warren ctl change_password guest NEW) or delete it (warren ctl delete_user guest) once you have added an administrator",
			zap.Bool("loopback-only", b.LoopbackOnly("guest", "192.0.2.1:1")))
	}
	log.Info("Warren started",
		zap.String("version", broker.Version),
		zap.Strings("listeners", listeners),
		zap.String("console", console),
		zap.String("data-dir", dataDir))
}

// reachable is host:port of a listener as a browser on the same machine
// reaches it: an unspecified address becomes localhost.
func reachable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
