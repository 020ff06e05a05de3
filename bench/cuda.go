//go:build linux && cgo

package bench

// The CUDA driver API, loaded at run time: libcuda.so.1 is opened with dlopen and each
// function is looked up with dlsym, so that building gpunex needs neither the CUDA toolkit
// nor the driver, and a machine without them gets an error, not a crash. Every call goes
// through a C wrapper that returns cudaUnresolved instead of calling a function that was
// not found.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUevent;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

// Returned by a wrapper whose function libcuda does not export.
#define GX_UNRESOLVED (-1)

static void *gx_lib;
static CUresult (*gx_cuInit)(unsigned int);
static CUresult (*gx_cuDriverGetVersion)(int *);
static CUresult (*gx_cuGetErrorString)(CUresult, const char **);
static CUresult (*gx_cuGetErrorName)(CUresult, const char **);
static CUresult (*gx_cuDeviceGetCount)(int *);
static CUresult (*gx_cuDeviceGet)(CUdevice *, int);
static CUresult (*gx_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*gx_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*gx_cuDeviceGetUuid)(unsigned char *, CUdevice);
static CUresult (*gx_cuDeviceGetUuid_v2)(unsigned char *, CUdevice);
static CUresult (*gx_cuDeviceGetPCIBusId)(char *, int, CUdevice);
static CUresult (*gx_cuCtxCreate_v2)(CUcontext *, unsigned int, CUdevice);
static CUresult (*gx_cuCtxDestroy_v2)(CUcontext);
static CUresult (*gx_cuCtxSynchronize)(void);
static CUresult (*gx_cuMemGetInfo_v2)(size_t *, size_t *);
static CUresult (*gx_cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
static CUresult (*gx_cuModuleUnload)(CUmodule);
static CUresult (*gx_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*gx_cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
static CUresult (*gx_cuMemAlloc_v2)(CUdeviceptr *, size_t);
static CUresult (*gx_cuMemFree_v2)(CUdeviceptr);
static CUresult (*gx_cuMemsetD32_v2)(CUdeviceptr, unsigned int, size_t);
static CUresult (*gx_cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
static CUresult (*gx_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
	unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
static CUresult (*gx_cuEventCreate)(CUevent *, unsigned int);
static CUresult (*gx_cuEventDestroy_v2)(CUevent);
static CUresult (*gx_cuEventRecord)(CUevent, CUstream);
static CUresult (*gx_cuEventSynchronize)(CUevent);
static CUresult (*gx_cuEventElapsedTime)(float *, CUevent, CUevent);

struct gx_symbol {
	const char *name;
	void **slot;
	int required;
};

#define GX_SYM(fn, req) { #fn, (void **)&gx_##fn, req }

static struct gx_symbol gx_symbols[] = {
	GX_SYM(cuInit, 1),
	GX_SYM(cuDriverGetVersion, 1),
	GX_SYM(cuGetErrorString, 1),
	GX_SYM(cuGetErrorName, 1),
	GX_SYM(cuDeviceGetCount, 1),
	GX_SYM(cuDeviceGet, 1),
	GX_SYM(cuDeviceGetAttribute, 1),
	GX_SYM(cuDeviceGetName, 1),
	GX_SYM(cuDeviceGetUuid, 0),
	GX_SYM(cuDeviceGetUuid_v2, 0),
	GX_SYM(cuDeviceGetPCIBusId, 0),
	GX_SYM(cuCtxCreate_v2, 1),
	GX_SYM(cuCtxDestroy_v2, 1),
	GX_SYM(cuCtxSynchronize, 1),
	GX_SYM(cuMemGetInfo_v2, 1),
	GX_SYM(cuModuleLoadDataEx, 1),
	GX_SYM(cuModuleUnload, 1),
	GX_SYM(cuModuleGetFunction, 1),
	GX_SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor, 0),
	GX_SYM(cuMemAlloc_v2, 1),
	GX_SYM(cuMemFree_v2, 1),
	GX_SYM(cuMemsetD32_v2, 1),
	GX_SYM(cuMemcpyDtoH_v2, 1),
	GX_SYM(cuLaunchKernel, 1),
	GX_SYM(cuEventCreate, 1),
	GX_SYM(cuEventDestroy_v2, 1),
	GX_SYM(cuEventRecord, 1),
	GX_SYM(cuEventSynchronize, 1),
	GX_SYM(cuEventElapsedTime, 1),
};

// gx_open loads the library named path and resolves its functions. It returns 0, 1 where
// the library cannot be opened, or 2 where a required function is missing; err says which.
static int gx_open(const char *path, char *err, size_t errlen) {
	if (gx_lib != NULL) {
		return 0;
	}
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	size_t n = sizeof gx_symbols / sizeof gx_symbols[0];
	for (size_t i = 0; i < n; i++) {
		*gx_symbols[i].slot = dlsym(lib, gx_symbols[i].name);
		if (*gx_symbols[i].slot == NULL && gx_symbols[i].required) {
			snprintf(err, errlen, "%s is missing from %s", gx_symbols[i].name, path);
			for (size_t j = 0; j < n; j++) {
				*gx_symbols[j].slot = NULL;
			}
			dlclose(lib);
			return 2;
		}
	}
	if (gx_cuDeviceGetUuid_v2 == NULL && gx_cuDeviceGetUuid == NULL && gx_cuDeviceGetPCIBusId == NULL) {
		snprintf(err, errlen, "neither cuDeviceGetUuid nor cuDeviceGetPCIBusId is in %s", path);
		for (size_t j = 0; j < n; j++) {
			*gx_symbols[j].slot = NULL;
		}
		dlclose(lib);
		return 2;
	}
	gx_lib = lib;
	return 0;
}

static int gx_loaded(void) { return gx_lib != NULL; }
static int gx_symbol_count(void) { return (int)(sizeof gx_symbols / sizeof gx_symbols[0]); }
static const char *gx_symbol_name(int i) { return gx_symbols[i].name; }
static int gx_symbol_resolved(int i) { return *gx_symbols[i].slot != NULL; }

#define GX_CALL(fn, ...) return gx_##fn == NULL ? GX_UNRESOLVED : gx_##fn(__VA_ARGS__)

static CUresult gx_init(void) { GX_CALL(cuInit, 0); }
static CUresult gx_driver_version(int *v) { GX_CALL(cuDriverGetVersion, v); }
static CUresult gx_error_string(CUresult r, const char **s) { GX_CALL(cuGetErrorString, r, s); }
static CUresult gx_error_name(CUresult r, const char **s) { GX_CALL(cuGetErrorName, r, s); }
static CUresult gx_device_count(int *n) { GX_CALL(cuDeviceGetCount, n); }
static CUresult gx_device_get(CUdevice *d, int ordinal) { GX_CALL(cuDeviceGet, d, ordinal); }
static CUresult gx_device_attribute(int *v, int attr, CUdevice d) { GX_CALL(cuDeviceGetAttribute, v, attr, d); }
static CUresult gx_device_name(char *s, int n, CUdevice d) { GX_CALL(cuDeviceGetName, s, n, d); }
static CUresult gx_device_pci_bus_id(char *s, int n, CUdevice d) { GX_CALL(cuDeviceGetPCIBusId, s, n, d); }
static CUresult gx_device_uuid(unsigned char *u, CUdevice d) {
	if (gx_cuDeviceGetUuid_v2 != NULL) {
		return gx_cuDeviceGetUuid_v2(u, d);
	}
	GX_CALL(cuDeviceGetUuid, u, d);
}
static CUresult gx_ctx_create(CUcontext *c, CUdevice d) { GX_CALL(cuCtxCreate_v2, c, 0, d); }
static CUresult gx_ctx_destroy(CUcontext c) { GX_CALL(cuCtxDestroy_v2, c); }
static CUresult gx_ctx_synchronize(void) { GX_CALL(cuCtxSynchronize); }
static CUresult gx_mem_info(size_t *free, size_t *total) { GX_CALL(cuMemGetInfo_v2, free, total); }
static CUresult gx_module_unload(CUmodule m) { GX_CALL(cuModuleUnload, m); }
static CUresult gx_module_function(CUfunction *f, CUmodule m, const char *name) { GX_CALL(cuModuleGetFunction, f, m, name); }
static CUresult gx_occupancy(int *blocks, CUfunction f, int block_size) {
	GX_CALL(cuOccupancyMaxActiveBlocksPerMultiprocessor, blocks, f, block_size, 0);
}
static CUresult gx_mem_alloc(CUdeviceptr *p, size_t n) { GX_CALL(cuMemAlloc_v2, p, n); }
static CUresult gx_mem_free(CUdeviceptr p) { GX_CALL(cuMemFree_v2, p); }
static CUresult gx_memset32(CUdeviceptr p, unsigned int v, size_t n) { GX_CALL(cuMemsetD32_v2, p, v, n); }
static CUresult gx_copy_to_host(void *dst, CUdeviceptr src, size_t n) { GX_CALL(cuMemcpyDtoH_v2, dst, src, n); }
static CUresult gx_event_create(CUevent *e) { GX_CALL(cuEventCreate, e, 0); }
static CUresult gx_event_destroy(CUevent e) { GX_CALL(cuEventDestroy_v2, e); }
static CUresult gx_event_record(CUevent e) { GX_CALL(cuEventRecord, e, NULL); }
static CUresult gx_event_synchronize(CUevent e) { GX_CALL(cuEventSynchronize, e); }
static CUresult gx_event_elapsed(float *ms, CUevent start, CUevent end) { GX_CALL(cuEventElapsedTime, ms, start, end); }

// gx_module_load JIT-compiles a NUL-terminated PTX image, with the JIT's error log in log.
static CUresult gx_module_load(CUmodule *m, const char *ptx, char *log, size_t loglen) {
	int options[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *values[2] = {log, (void *)(uintptr_t)loglen};
	log[0] = 0;
	GX_CALL(cuModuleLoadDataEx, m, ptx, 2, options, values);
}

// gx_launch runs a kernel of up to 3 parameters, each a 64-bit value, on the default
// stream: grid blocks of block threads.
static CUresult gx_launch(CUfunction f, unsigned int grid, unsigned int block, int nargs,
		unsigned long long a0, unsigned long long a1, unsigned long long a2) {
	unsigned long long args[3] = {a0, a1, a2};
	void *params[3] = {&args[0], &args[1], &args[2]};
	if (nargs < 0 || nargs > 3) {
		return 1; // CUDA_ERROR_INVALID_VALUE
	}
	GX_CALL(cuLaunchKernel, f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// cudaUnresolved is what a wrapper returns for a function libcuda does not export.
const cudaUnresolved = -1

// CUDA driver API constants used here (cuda.h).
const (
	cudaSuccess         = 0
	attrClockRate       = 13 // kHz
	attrSMCount         = 16
	attrMemClockRate    = 36 // kHz
	attrMemBusWidth     = 37 // bits
	attrMaxThreadsPerSM = 39
	attrCCMajor         = 75
	attrCCMinor         = 76
)

// cudaLibrary is the file name the driver installs the CUDA driver API as.
const cudaLibrary = "libcuda.so.1"

var (
	cudaOnce    sync.Once
	cudaLoadErr error
)

// loadCUDA opens libcuda.so.1 and runs cuInit, once per process. Its error wraps
// ErrComputeUnavailable and says what is missing.
func loadCUDA() error {
	cudaOnce.Do(func() { cudaLoadErr = openCUDA(cudaLibrary) })
	return cudaLoadErr
}

// openCUDA loads the library at path and initialises the driver.
func openCUDA(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	buf := make([]byte, 512)
	switch C.gx_open(cpath, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) {
	case 0:
	case 1:
		return fmt.Errorf("%w: %s not found: install the NVIDIA driver (%s)", ErrComputeUnavailable, path, cBytes(buf))
	default:
		return fmt.Errorf("%w: %s is too old for gpunex: %s; update the NVIDIA driver", ErrComputeUnavailable, path, cBytes(buf))
	}
	if err := cudaCheck("cuInit", C.gx_init()); err != nil {
		return fmt.Errorf("%w: the CUDA driver does not start: %v", ErrComputeUnavailable, err)
	}
	return nil
}

// cudaLoaded says whether libcuda is loaded in this process (cuInit may still have failed).
func cudaLoaded() bool { return C.gx_loaded() != 0 }

// cudaMissingFunctions lists the driver functions libcuda does not export: only optional
// ones once the library is loaded.
func cudaMissingFunctions() []string {
	var out []string
	for i := 0; i < int(C.gx_symbol_count()); i++ {
		if C.gx_symbol_resolved(C.int(i)) == 0 {
			out = append(out, C.GoString(C.gx_symbol_name(C.int(i))))
		}
	}
	return out
}

// cudaDriverVersion is the CUDA version the driver supports, e.g. 12020 for 12.2.
func cudaDriverVersion() (int, error) {
	var v C.int
	return int(v), cudaCheck("cuDriverGetVersion", C.gx_driver_version(&v))
}

// cudaError is a failed driver call.
type cudaError struct {
	Call string
	Code int
	Name string // CUDA_ERROR_...
	Text string
}

func (e *cudaError) Error() string {
	switch {
	case e.Code == cudaUnresolved:
		return e.Call + ": not exported by " + cudaLibrary
	case e.Name != "":
		return fmt.Sprintf("%s: %s (%s)", e.Call, e.Name, e.Text)
	default:
		return fmt.Sprintf("%s: CUDA error %d", e.Call, e.Code)
	}
}

// cudaCheck turns a result code into an error, nil for success.
func cudaCheck(call string, r C.CUresult) error {
	if r == cudaSuccess {
		return nil
	}
	e := &cudaError{Call: call, Code: int(r)}
	if r != cudaUnresolved {
		var name, text *C.char
		if C.gx_error_name(r, &name) == cudaSuccess && name != nil {
			e.Name = C.GoString(name)
		}
		if C.gx_error_string(r, &text) == cudaSuccess && text != nil {
			e.Text = C.GoString(text)
		}
	}
	return e
}

// cudaCode is the result code of a CUDA error, or 0.
func cudaCode(err error) int {
	var e *cudaError
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func cBytes(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

// cudaDevice is one CUDA device as the driver API numbers it.
type cudaDevice struct {
	Ordinal         int
	handle          C.CUdevice
	Name            string
	UUID            string // NVML's form, "GPU-..."; "" where the driver cannot say
	PCIBusID        string // "0000:18:00.0"
	SMs             int
	CCMajor         int
	CCMinor         int
	ClockKHz        int
	MemClockKHz     int
	MemBusWidth     int
	MaxThreadsPerSM int // resident threads per SM
}

// cudaDevices lists the devices CUDA sees (those CUDA_VISIBLE_DEVICES leaves).
func cudaDevices() ([]cudaDevice, error) {
	var n C.int
	if err := cudaCheck("cuDeviceGetCount", C.gx_device_count(&n)); err != nil {
		return nil, err
	}
	out := make([]cudaDevice, 0, int(n))
	for i := 0; i < int(n); i++ {
		d := cudaDevice{Ordinal: i}
		if err := cudaCheck("cuDeviceGet", C.gx_device_get(&d.handle, C.int(i))); err != nil {
			return nil, err
		}
		name := make([]byte, 256)
		if err := cudaCheck("cuDeviceGetName", C.gx_device_name((*C.char)(unsafe.Pointer(&name[0])), C.int(len(name)), d.handle)); err != nil {
			return nil, err
		}
		d.Name = cBytes(name)
		var uuid [16]byte
		if C.gx_device_uuid((*C.uchar)(unsafe.Pointer(&uuid[0])), d.handle) == cudaSuccess {
			d.UUID = formatGPUUUID(uuid)
		}
		bus := make([]byte, 64)
		if C.gx_device_pci_bus_id((*C.char)(unsafe.Pointer(&bus[0])), C.int(len(bus)), d.handle) == cudaSuccess {
			d.PCIBusID = cBytes(bus)
		}
		for _, a := range []struct {
			attr int
			to   *int
		}{
			{attrSMCount, &d.SMs}, {attrCCMajor, &d.CCMajor}, {attrCCMinor, &d.CCMinor},
			{attrClockRate, &d.ClockKHz}, {attrMemClockRate, &d.MemClockKHz},
			{attrMemBusWidth, &d.MemBusWidth}, {attrMaxThreadsPerSM, &d.MaxThreadsPerSM},
		} {
			var v C.int
			if err := cudaCheck("cuDeviceGetAttribute", C.gx_device_attribute(&v, C.int(a.attr), d.handle)); err != nil {
				return nil, fmt.Errorf("device %d attribute %d: %w", i, a.attr, err)
			}
			*a.to = int(v)
		}
		out = append(out, d)
	}
	return out, nil
}

// cudaContext is a context on one device, current on the calling OS thread: its user must
// hold the thread (runtime.LockOSThread) from creation to Close.
type cudaContext struct {
	ctx C.CUcontext
}

func newCUDAContext(d cudaDevice) (*cudaContext, error) {
	c := &cudaContext{}
	if err := cudaCheck("cuCtxCreate_v2", C.gx_ctx_create(&c.ctx, d.handle)); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cudaContext) Close() error {
	return cudaCheck("cuCtxDestroy_v2", C.gx_ctx_destroy(c.ctx))
}

func (c *cudaContext) Synchronize() error {
	return cudaCheck("cuCtxSynchronize", C.gx_ctx_synchronize())
}

// MemInfo is the device's free and total memory in bytes.
func (c *cudaContext) MemInfo() (free, total uint64, err error) {
	var f, t C.size_t
	err = cudaCheck("cuMemGetInfo_v2", C.gx_mem_info(&f, &t))
	return uint64(f), uint64(t), err
}

// cudaModule is a JIT-compiled PTX module.
type cudaModule struct {
	mod C.CUmodule
}

// LoadModule compiles a PTX image for the context's device. A PTX error comes back with the
// JIT compiler's log.
func (c *cudaContext) LoadModule(name, ptx string) (*cudaModule, error) {
	cptx := C.CString(ptx)
	defer C.free(unsafe.Pointer(cptx))
	log := (*C.char)(C.calloc(8192, 1))
	defer C.free(unsafe.Pointer(log))
	m := &cudaModule{}
	if err := cudaCheck("cuModuleLoadDataEx", C.gx_module_load(&m.mod, cptx, log, 8192)); err != nil {
		if l := strings.TrimSpace(C.GoString(log)); l != "" {
			return nil, fmt.Errorf("PTX module %s: %w: JIT log: %s", name, err, l)
		}
		return nil, fmt.Errorf("PTX module %s: %w", name, err)
	}
	return m, nil
}

func (m *cudaModule) Close() error {
	return cudaCheck("cuModuleUnload", C.gx_module_unload(m.mod))
}

// cudaFunction is a kernel of a module.
type cudaFunction struct {
	Name string
	fn   C.CUfunction
}

func (m *cudaModule) Function(name string) (*cudaFunction, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := &cudaFunction{Name: name}
	if err := cudaCheck("cuModuleGetFunction "+name, C.gx_module_function(&f.fn, m.mod, cname)); err != nil {
		return nil, err
	}
	return f, nil
}

// BlocksPerSM is how many blocks of blockSize threads fit on one SM at once; fallback where
// the driver cannot say.
func (f *cudaFunction) BlocksPerSM(blockSize, fallback int) int {
	var n C.int
	if C.gx_occupancy(&n, f.fn, C.int(blockSize)) != cudaSuccess || n < 1 {
		return fallback
	}
	return int(n)
}

// Launch queues the kernel on the default stream with up to 3 64-bit arguments.
func (f *cudaFunction) Launch(grid, block int, args ...uint64) error {
	var a [3]uint64
	if len(args) > len(a) {
		return fmt.Errorf("kernel %s: %d arguments, at most %d", f.Name, len(args), len(a))
	}
	copy(a[:], args)
	r := C.gx_launch(f.fn, C.uint(grid), C.uint(block), C.int(len(args)), C.ulonglong(a[0]), C.ulonglong(a[1]), C.ulonglong(a[2]))
	return cudaCheck("cuLaunchKernel "+f.Name, r)
}

// cudaBuffer is device memory.
type cudaBuffer struct {
	Ptr  uint64
	Size uint64
}

func cudaAlloc(size uint64) (*cudaBuffer, error) {
	var p C.CUdeviceptr
	if err := cudaCheck(fmt.Sprintf("cuMemAlloc_v2 (%d bytes)", size), C.gx_mem_alloc(&p, C.size_t(size))); err != nil {
		return nil, err
	}
	return &cudaBuffer{Ptr: uint64(p), Size: size}, nil
}

func (b *cudaBuffer) Free() error {
	return cudaCheck("cuMemFree_v2", C.gx_mem_free(C.CUdeviceptr(b.Ptr)))
}

// Fill sets every 32-bit word of the buffer to v.
func (b *cudaBuffer) Fill(v uint32) error {
	return cudaCheck("cuMemsetD32_v2", C.gx_memset32(C.CUdeviceptr(b.Ptr), C.uint(v), C.size_t(b.Size/4)))
}

// Read copies n 32-bit words from the buffer, starting at byte offset off, to the host.
func (b *cudaBuffer) Read(off uint64, n int) ([]uint32, error) {
	if n <= 0 || off+uint64(n)*4 > b.Size {
		return nil, fmt.Errorf("read of %d words at %d from a %d-byte buffer", n, off, b.Size)
	}
	out := make([]uint32, n)
	r := C.gx_copy_to_host(unsafe.Pointer(&out[0]), C.CUdeviceptr(b.Ptr+off), C.size_t(n*4))
	return out, cudaCheck("cuMemcpyDtoH_v2", r)
}

// cudaTimer times work on the default stream with a pair of events.
type cudaTimer struct {
	start, end C.CUevent
}

func newCUDATimer() (*cudaTimer, error) {
	t := &cudaTimer{}
	if err := cudaCheck("cuEventCreate", C.gx_event_create(&t.start)); err != nil {
		return nil, err
	}
	if err := cudaCheck("cuEventCreate", C.gx_event_create(&t.end)); err != nil {
		C.gx_event_destroy(t.start)
		return nil, err
	}
	return t, nil
}

func (t *cudaTimer) Close() {
	C.gx_event_destroy(t.start)
	C.gx_event_destroy(t.end)
}

// Start records the start event.
func (t *cudaTimer) Start() error { return cudaCheck("cuEventRecord", C.gx_event_record(t.start)) }

// Stop records the end event, waits for it and returns the seconds between the two.
func (t *cudaTimer) Stop() (float64, error) {
	if err := cudaCheck("cuEventRecord", C.gx_event_record(t.end)); err != nil {
		return 0, err
	}
	if err := cudaCheck("cuEventSynchronize", C.gx_event_synchronize(t.end)); err != nil {
		return 0, err
	}
	var ms C.float
	if err := cudaCheck("cuEventElapsedTime", C.gx_event_elapsed(&ms, t.start, t.end)); err != nil {
		return 0, err
	}
	return float64(ms) / 1000, nil
}
