package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meganode/meganode/internal/scheduler/intake"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// The admission webhook intake as the roles run it: the handler and its HTTPS server are the
// intake's (intake/webhook_http.go); here Config picks them and role all or role collector
// wires them to its intakes.

// checkIntake validates Config.Intake.
func (c *Config) checkIntake() error {
	switch c.Intake {
	case "", intake.ModeWatch, intake.ModeWebhook:
		return nil
	}
	return fmt.Errorf("--intake: want %s or %s, got %q", intake.ModeWatch, intake.ModeWebhook, c.Intake)
}

// startWebhookAll serves the webhook for role all: every collector is in this process, so a
// pod goes straight to the intake it hashes to.
func startWebhookAll(ctx context.Context, cfg Config, intakes []*intake.Intake) error {
	if cfg.Intake != intake.ModeWebhook {
		return nil
	}
	h := intake.NewWebhookHandler(cfg.SchedulerName, func(p *corev1.Pod) {
		intakes[wire.CollectorOf(p.Namespace, p.Name, len(intakes))].Offer(p)
	})
	return serveWebhookLogged(ctx, cfg, h)
}

func serveWebhookLogged(ctx context.Context, cfg Config, h http.Handler) error {
	addr, ca, err := intake.ServeWebhook(ctx, cfg.Webhook, h)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "meganode scheduler: admission webhook on https://%s%s", addr, intake.WebhookPath)
	if ca != "" {
		fmt.Fprintf(os.Stderr, " (generated certificate; CA bundle in %s)", ca)
	}
	fmt.Fprintln(os.Stderr)
	return nil
}

// startWebhookCollector serves the webhook for role collector. The webhook Service lands on any
// collector; a pod that hashes to another one is forwarded to it as a frame (the envelope the
// relays carry) over the existing gRPC Scatter stream of the peer's --listen address, which a
// collector serves only for this. The returned FrameSink (nil in watch mode) takes the frames
// peers forward here. A forward that fails is left to the owner's reconcile LIST.
func startWebhookCollector(ctx context.Context, cfg Config, rc RoleConfig, in *intake.Intake) (wire.FrameSink, error) {
	if cfg.Intake != intake.ModeWebhook {
		return nil, nil
	}
	peers := map[int]*wire.Client{}
	if cfg.Collectors > 1 && len(rc.Collectors) != cfg.Collectors {
		return nil, fmt.Errorf("--intake webhook with %d collectors: --collector-addrs must list all %d collectors (to forward pods)",
			cfg.Collectors, cfg.Collectors)
	}
	for i, a := range rc.Collectors {
		if i == rc.Index || cfg.Collectors <= 1 {
			continue
		}
		c, err := wire.Dial(ctx, a, cfg.QueueLen)
		if err != nil {
			return nil, err
		}
		peers[i] = c
	}
	m := metrics.For("webhook")
	h := intake.NewWebhookHandler(cfg.SchedulerName, func(p *corev1.Pod) {
		to := wire.CollectorOf(p.Namespace, p.Name, max(cfg.Collectors, 1))
		if to == rc.Index {
			in.Offer(p)
			return
		}
		peer := peers[to]
		frame, err := wire.EncodeFrame(wire.Header{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Collector: to,
			SentNanos: time.Now().UnixNano()}, p)
		if peer == nil || err != nil {
			m.Add("forward_errors", 1)
			return
		}
		go func() {
			fctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := peer.Send(fctx, frame); err != nil {
				m.Add("forward_errors", 1)
				return
			}
			m.Add("forwarded_out", 1)
		}()
	})
	if err := serveWebhookLogged(ctx, cfg, h); err != nil {
		return nil, err
	}
	return forwardedPods{in: in, m: m}, nil
}

// forwardedPods is a collector's FrameSink: pods a peer's webhook forwarded here.
type forwardedPods struct {
	in *intake.Intake
	m  *metrics.Counters
}

func (f forwardedPods) Send(_ context.Context, frame []byte) error {
	h, b, err := wire.SplitFrame(frame)
	if err != nil {
		f.m.Add("forward_errors", 1)
		return nil
	}
	p, err := wire.DecodePod(b)
	if err != nil || h.Collector != f.in.Index() {
		f.m.Add("forward_errors", 1)
		return nil
	}
	f.m.Add("forwarded_in", 1)
	f.in.Offer(p)
	return nil
}
