// Command vcsim-lab: govmomi's vCenter simulator (package simulator, the engine of vcsim) with
// the noderemedy lab's power hook. Written for the lab; the simulator is govmomi's.
//
// Flags: -l host:port, -username, -password, -tlscert, -tlskey, -vm N (VMs per resource pool),
// -power-delay-ms (PowerOnVM_Task / PowerOffVM_Task take this long, as on a real host),
// -stays-on NAME[,NAME...] (those VMs accept PowerOffVM_Task, whose task succeeds, and stay
// poweredOn: a host that says yes and does nothing).
// Environment: NODEREMEDY_POWER_HOOK (JSON argv) and NODEREMEDY_VM_NODES (JSON {vm name: node}):
// every power state change of such a VM runs hook + [node, "0"|"1"] (bounded to 10 s).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

type powerHook struct {
	argv  []string
	nodes map[string]string
}

func (h *powerHook) Reference() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "NoderemedyLab", Value: "power-hook"}
}

func (h *powerHook) PutObject(*simulator.Context, mo.Reference) {}

func (h *powerHook) RemoveObject(*simulator.Context, types.ManagedObjectReference) {}

func (h *powerHook) UpdateObject(_ *simulator.Context, obj mo.Reference, changes []types.PropertyChange) {
	vm, ok := obj.(*mo.VirtualMachine)
	if !ok || len(h.argv) == 0 {
		return
	}
	node, bound := h.nodes[vm.Name]
	if !bound {
		return
	}
	for _, c := range changes {
		if c.Name != "runtime.powerState" {
			continue
		}
		value := "0"
		if strings.Contains(fmt.Sprint(c.Val), string(types.VirtualMachinePowerStatePoweredOn)) {
			value = "1"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		args := append(append([]string{}, h.argv[1:]...), node, value)
		out, err := exec.CommandContext(ctx, h.argv[0], args...).CombinedOutput()
		cancel()
		log.Printf("power hook %s %s: err=%v %s", node, value, err, strings.TrimSpace(string(out)))
	}
}

// staysOn answers PowerOffVM_Task for the VMs listed in -stays-on: the same power-off task the
// simulator creates, completing with success, and no change to the VM's power state.
//
// The registry's Handler is asked first for every method call, but a logged-in session's lookup
// of the call's target then replaces whatever it returned (Session.Get falls back to the shared
// registry), so the Handler points the call at this object's own reference instead, which no
// registry holds. The VM is still named by the request body's This.
type staysOn struct {
	Self  types.ManagedObjectReference
	names map[string]bool
}

func (s *staysOn) Reference() types.ManagedObjectReference { return s.Self }

func (s *staysOn) PowerOffVMTask(ctx *simulator.Context, req *types.PowerOffVM_Task) soap.HasFault {
	vm := ctx.Map.Get(req.This).(*simulator.VirtualMachine)
	name := vm.Name
	task := simulator.CreateTask(vm, "powerOff", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		log.Printf("stays-on %s: PowerOffVM_Task accepted, power left as it is", name)
		return nil, nil
	})
	return &methods.PowerOffVM_TaskBody{Res: &types.PowerOffVM_TaskResponse{Returnval: task.Run(ctx)}}
}

func (s *staysOn) handler(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
	if m.Name != "PowerOffVM_Task" {
		return nil, nil
	}
	vm, ok := ctx.Map.Get(m.This).(*simulator.VirtualMachine)
	if !ok || !s.names[vm.Name] {
		return nil, nil
	}
	m.This = s.Self
	return s, nil
}

func main() {
	listen := flag.String("l", "127.0.0.1:8989", "listen address")
	user := flag.String("username", "user", "login user name")
	pass := flag.String("password", "pass", "login password")
	cert := flag.String("tlscert", "", "TLS certificate file")
	key := flag.String("tlskey", "", "TLS key file")
	vms := flag.Int("vm", 2, "VMs per resource pool")
	delay := flag.Int("power-delay-ms", 500, "milliseconds PowerOnVM_Task / PowerOffVM_Task take")
	staysOnVMs := flag.String("stays-on", "", "comma-separated VM names that accept power-off and stay on")
	flag.Parse()

	hook := &powerHook{nodes: map[string]string{}}
	if v := os.Getenv("NODEREMEDY_POWER_HOOK"); v != "" {
		if err := json.Unmarshal([]byte(v), &hook.argv); err != nil {
			log.Fatalf("NODEREMEDY_POWER_HOOK: %v", err)
		}
	}
	if v := os.Getenv("NODEREMEDY_VM_NODES"); v != "" {
		if err := json.Unmarshal([]byte(v), &hook.nodes); err != nil {
			log.Fatalf("NODEREMEDY_VM_NODES: %v", err)
		}
	}

	model := simulator.VPX()
	model.Machine = *vms
	delays := map[string]int{"PowerOnVM_Task": *delay, "PowerOffVM_Task": *delay}
	model.DelayConfig.MethodDelay = delays
	simulator.TaskDelay.MethodDelay = delays
	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	model.Map().AddHandler(hook)
	if *staysOnVMs != "" {
		names := map[string]bool{}
		for _, n := range strings.Split(*staysOnVMs, ",") {
			names[n] = true
		}
		so := &staysOn{Self: types.ManagedObjectReference{Type: "NoderemedyLab", Value: "stays-on"}, names: names}
		model.Map().Handler = so.handler
	}
	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*user, *pass)}
	model.Service.TLS = new(tls.Config)
	if *cert != "" {
		c, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			log.Fatal(err)
		}
		model.Service.TLS.Certificates = []tls.Certificate{c}
	}
	s := model.Service.NewServer()
	fmt.Printf("listening on %s\n", s.URL.Host)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	s.Close()
	model.Remove()
}
