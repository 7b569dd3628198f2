"""Trains a YOLO11 of one scale with ultralytics on the generated shapes dataset (the model the
speed runs validate: its confidences, hence NMS's work, are a trained detector's).

python3 benches/yolo_train_shapes.py SHAPES_DIR OUT_PT SCALE EPOCHS   (needs ultralytics)
"""
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests/fixtures/yolo"))
import polars_stand_in  # noqa: E402,F401  (ultralytics imports polars)
from ultralytics import YOLO  # noqa: E402

shapes, out, scale, epochs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
YOLO(f"yolo11{scale}.yaml").train(
    data=str(shapes / "data.yaml"), epochs=epochs, imgsz=320, batch=32, workers=8, amp=False,
    plots=False, project="/tmp/yolo_train", name=scale, exist_ok=True, seed=0, verbose=False,
)
out.parent.mkdir(parents=True, exist_ok=True)
shutil.copy(f"/tmp/yolo_train/{scale}/weights/best.pt", out)
print(f"trained yolo11{scale}: {out}")
